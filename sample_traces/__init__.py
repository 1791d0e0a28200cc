"""Small generated jobs bundled with paradiag (see README.md here); data files, not code."""
