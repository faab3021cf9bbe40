"""Reading English about a user's things: what a question asks, which values a sentence states about which
subject, dates and periods, spatial relations, and the update chains built from them.

Pure functions of text and of ``c3m.types`` (no store, no model): the read path (date windows, time marks on a
context) and the offline answerer (``c3m.models.answer``) both stand on them, so they live below both.
"""
