# shellcheck shell=bash
# Polaris: the conda module lives in ALCF's module tree.
module use /soft/modulefiles
