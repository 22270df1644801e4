"""`python -m mailroom`: the same command line as the `mailroom` script."""

from mailroom.cli import main

if __name__ == "__main__":
    main(prog_name="mailroom")
