"""`python -m agpt NAME ...`: the same CLI as the `agpt` console script."""

from agpt.cli import main

if __name__ == "__main__":
    main()
