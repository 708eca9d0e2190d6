# shellcheck shell=bash
# site/NAME/hooks/post-env.sh: sourced by env_setup after SITE_MODULES are loaded and before the venv is
# created or activated.  Example: activate the base conda environment the venv builds on.
# conda activate base
:
