"""Running the rules: the validator, the fixes, the report formats, the
project settings and what `tpuemb inspect` shows.
"""
