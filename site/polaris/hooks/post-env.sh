# shellcheck shell=bash
# Polaris: the conda module provides torch in its base environment; the venv builds on it.
conda activate base
