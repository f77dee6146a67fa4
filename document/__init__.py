"""parasuite document package."""
