"""parasuite text package."""
