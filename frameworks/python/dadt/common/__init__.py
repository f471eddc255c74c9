"""Framework-agnostic pieces shared by dadt's front ends (torch now; TensorFlow and JAX later)."""
