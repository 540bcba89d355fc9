"""kiln job: training jobs on kiln clusters."""
