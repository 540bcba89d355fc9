"""The directory the reaper's Lambda asset is built from: only the kiln_reaper package goes in it."""
