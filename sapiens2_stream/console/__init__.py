"""The web console: live views, status and sources added or removed while running."""
