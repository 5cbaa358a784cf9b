"""Generated protobuf modules (built from protos/ by `pip install`; never edited or committed)."""
