"""The trainers: the single-process local trainer, its update and preflight, and verl's
adapter (seal/trainer/verl/, the only place verl and Ray are imported)."""
