"""``python -m pyrnn_cl``: the same command line as ``pyrnn-cl``."""

from pyrnn_cl.cli import main

raise SystemExit(main())
