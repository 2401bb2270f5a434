"""A dataset's report: plots and a trace viewer in one self-contained HTML page.

tables (committed rows) -> figures and traces (pure) -> document (JSON) -> page (HTML);
live.py serves the page and the document and follows the dataset as rows land.
"""

from harbor_ray.report.build import REPORT_FILE, report_document, write_report

__all__ = ["REPORT_FILE", "report_document", "write_report"]
