def checkpoint_report(a, b, **kw):
    return None, []
