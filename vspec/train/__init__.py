"""Training: data, recipes, checkpoints and the loop behind tools/train.py."""
