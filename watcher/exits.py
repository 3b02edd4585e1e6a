"""The exit statuses of every command.

0: the analysis ran, or the watcher stopped on a signal; 2: a usage, config or input error (what was analysed
before it is still printed), or the watcher could not start; 3: with `--fail-on-findings`, something was found.
"""

EXIT_OK = 0
EXIT_ERROR = 2
EXIT_FINDINGS = 3
