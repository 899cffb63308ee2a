"""vspec's tests, laid out like the package: tests/<subpackage>/ for vspec/<subpackage>/, tests/models/<family>/
for each family, tests/test_<module>.py for vspec/<module>.py; shared helpers in tests/helpers/."""
