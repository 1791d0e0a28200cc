"""Static files served by the dashboard (CSS, JS); data files, not code."""
