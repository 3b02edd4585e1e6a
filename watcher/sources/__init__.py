"""Sources turn wire data (recorded captures, later the live watch) into `model.WatchEvent`s."""
