"""`python -m kg.cli`."""

from kg.cli.app import main

main()
