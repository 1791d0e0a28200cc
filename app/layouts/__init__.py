"""Page layouts: the shell (URL, selection store, header), the start page and the job page."""
