"""The write path: units, relation features, RAMU, and the capacity policy (the active index itself lives in ``c3m.index``)."""
