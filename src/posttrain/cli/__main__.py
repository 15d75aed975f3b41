"""`python -m posttrain.cli ...`: the `posttrain` command without an installed entry point."""

from posttrain.cli.app import main

main()
