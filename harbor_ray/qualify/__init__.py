"""`harbor-ray qualify`: real agent CLIs run end to end on sample tasks, into a report."""
