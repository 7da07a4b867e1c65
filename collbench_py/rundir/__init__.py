"""The run directory: its layout, manifest, pair plan and private files, and loading it into records."""
