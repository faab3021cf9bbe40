"""The read path: BMER routing and budgeted selection over an active index."""
