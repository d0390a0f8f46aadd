"""The ``gpufleet`` command line (typer and rich): one module per command, each imported when it
runs (:mod:`.main`)."""
