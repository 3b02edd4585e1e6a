"""`python -m watcher` is the `fightwatch` command."""

from watcher.cli import run

run()
