"""What each view needs, computed from the canonical tables (and the analysis report), cached by content hash."""
