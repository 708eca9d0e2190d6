# shellcheck shell=bash
# site/NAME/hooks/pre-env.sh: sourced by env_setup before SITE_MODULES are loaded, with the caller's shell
# options saved and restored around it.  Example: make a module tree visible.
# module use /soft/modulefiles
:
