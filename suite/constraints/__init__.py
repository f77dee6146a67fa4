"""Structured output's parts beside suite/constraint.py: the schema's keywords and the backend choice
(keywords.py), one grammar backend per file (xgrammar_backend.py, llguidance_backend.py), and the
check of every result against its schema (validate.py)."""
