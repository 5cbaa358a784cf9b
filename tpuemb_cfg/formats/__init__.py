"""Formats and locations: configurations in text, binary and JSON, npz files,
outputs written atomically, input limits and text positions.
"""
