"""Sources turn wire data (recorded captures, the live list-and-watch) into the engine's events: each event's JSON
text goes to the engine's decoder (`detection.events`)."""
