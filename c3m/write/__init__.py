"""The write path: units, relation features, RAMU, the bounded active index and its capacity policy."""
