"""Baked node images: EC2 Image Builder components from the bootstrap's install steps, and `kiln ami`."""
