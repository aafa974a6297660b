"""`python -m hookaudit`: the console script's entry point."""

from hookaudit.entry import main

if __name__ == "__main__":  # a multiprocessing child importing this module must not re-run
    main()
