"""The data sets' and GLUE tasks' names, torch-free: the commands' --help lists them without importing torch or an
extra (vspec/train/data.py and text.py hold the loaders; a test keeps the names equal to theirs)."""

DATASETS = ("digits", "mnist5k", "cifar10", "cifar100", "imagefolder", "synthetic")
TEXT_DATASETS = ("rt-polarity", "glue")
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
