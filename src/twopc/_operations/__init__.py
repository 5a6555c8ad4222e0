"""Operations: what an operator runs by hand.

``status`` (what a sink's commit log and target hold, and recovery from the command line),
``cli`` (the ``status``/``recover`` commands), ``demo`` and ``demo_query`` (``twopc demo``).
"""
