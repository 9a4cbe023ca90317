"""The verbs of ``ragbench`` (``ragbench.cli`` assembles them), one module each, as asv's
commands are: its arguments and ``--help`` text (``add_parser``) beside what it does
(``run``). What several share is in ``common``."""
