"""Model cards: the card built from a run's outputs, its evidence, health and claim labels, and front matter."""
