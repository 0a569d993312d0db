"""Page presenters: what a page shows, shaped from the selectors' reads (usage bars,
feed sentences, charts, rows with their words). Read-only, like the selectors; views call
them, selectors never do (``tests/test_architecture.py``)."""
