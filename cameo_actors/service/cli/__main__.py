"""`python -m cameo_actors.service.cli`: the `cameo` command."""

from cameo_actors.service.cli import main

main()
