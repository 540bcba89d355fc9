"""What several layers must agree on, written once, below the constructs: names, keys and the like. Standard library
only, so every layer (node-side code and Lambda code aside, which keep their own copies) may import it."""
