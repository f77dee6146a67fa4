"""parasuite apps package."""
