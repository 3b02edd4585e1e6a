"""Sources turn wire data (recorded captures, the live list-and-watch) into the engine's events.

Each event's JSON text goes to the engine's decoder (`detection.events`).

Importing the package installs `lazy_imports`, so that kubernetes-asyncio's generated modules load only when
used.
"""

from watcher.sources import lazy_imports

lazy_imports.install()
