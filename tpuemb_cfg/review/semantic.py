from types import SimpleNamespace
def semantic_report(a, b):
    return SimpleNamespace(changes=[], renamed={}, locate_new=lambda n: None, locate_old=lambda n: None)
