"""What tests share: builders, fakes and constants, one module per area (fixtures stay in the conftests)."""
