"""Every component id of the dashboard, in one place (layouts and callbacks import them from here)."""

URL = "url"
SELECTION = "selection"
RELEASE = "selection-release"  # asks for the views held back on a new page (once the heatmap is drawn)
ZOOM_STACK = "marey-zoom-stack"
EXPANDED = "expanded-stages"

START_PAGE = "start-page"
START_LINK = "start-link"
THEME_TOGGLE = "theme-toggle"  # assets/ux.js
GUIDE = "guide"
JOB_PAGE = "job-page"

SUMMARY_FACTS = "summary-facts"
WINDOW_PICKER = "window-picker"
FINDINGS = "findings"
FINDING_BUTTON = "finding-button"  # pattern-matching: {"type": FINDING_BUTTON, "index": i}

HEATMAP = "heatmap"
HEATMAP_METRIC = "heatmap-metric"
HEATMAP_EXPAND = "heatmap-expand"
HEATMAP_FOLD = "heatmap-fold"
STEPS = "steps"

TIMELINE = "timeline"
TIMELINE_INFO = "timeline-info"
# A zoom of the timeline or of Marey's graph, as its graph reported it (relayoutData) and stamped with when: the
# graph's relayoutData is cleared once read, so the same zoom again (after "back", a click, another step) is a
# change the selection hears (dcc.Graph reports no relayout equal to the last one it reported).
TIMELINE_ZOOM = "timeline-zoom"
MAREY_ZOOM = "marey-zoom"
TIMELINE_CLICK = (
    "timeline-click"  # a click on the timeline that was not half of a double-click (which zooms out)
)
TIMELINE_RANKS = "timeline-ranks"
EVENT_SEARCH = "event-search"  # the timeline's free-text search of the step's events by name
EVENT_MATCHES = (
    "event-matches"  # what it found: links to each match (its rank selected, the window around it)
)
TIMELINE_EXPAND = "timeline-expand"  # the folded rows opened (a stage, then a mesh group)
TIMELINE_DRAWN = (
    "timeline-drawn"  # what the timeline shows (so a selection that changes none of it redraws nothing)
)
TIMELINE_FOLDS = "timeline-folds"  # which fold each drawn row belongs to (so a click on a row opens it)
TIMELINE_PATH = "timeline-path"
TIMELINE_FOLD_ALL = "timeline-fold-all"
OP_SEARCH = "op-search"

DETAIL_TITLE = "detail-title"
DETAIL = "detail-graph"  # its four graphs as one figure (figures.detail.detail_figure)
DETAIL_DRAWN = (
    "detail-drawn"  # the rank, step and operator the detail shows (the same again: nothing redrawn)
)

MAREY = "marey"
MAREY_BACK = "marey-back"
MAREY_EXPAND = "marey-expand"
MAREY_CLICK = "marey-click"  # a click on Marey's graph that was not the first half of a double-click (which resets the zoom)
MAREY_PATH = "marey-path"  # the "critical path" toggle
MAREY_DRAWN = (
    "marey-drawn"  # what the Marey figure shows (so a new selected instance patches its outline alone)
)

FLOW = "flow"
FLOW_COLOR = "flow-color"
FLOW_EXPAND = "flow-expand"
FLOW_DRAWN = "flow-drawn"  # what the flow figure shows (so a new selected node patches its ring alone)

COMM_MATRIX = "comm-matrix"
COMM_METRIC = "comm-metric"
COMM_INSTANCES = "comm-instances"
COMM_DRILL = "comm-drill"  # the blocks of the matrix opened, per job
COMM_BLOCK = "comm-block"  # a click on a block of the matrix (not on a link between two ranks), passed on in the browser
COMM_UP = "comm-up"

BASELINE_PICKER = "baseline-picker"
COMPARE_SUMMARY = "compare-summary"
COMPARE_RANKS = "compare-ranks"
COMPARE_OPERATORS = "compare-operators"

STEP_PICKER = "step-picker"
CLEAR_SELECTION = "clear-selection"
SELECTION_TEXT = "selection-text"

SAMPLE_LIST = "sample-list"
UPLOAD_FOLDER = "upload-folder"
UPLOAD_FILES = "upload-files"
UPLOAD_STATE = "upload-state"
UPLOAD_PROGRESS = "upload-progress"
UPLOAD_MESSAGE = "upload-message"
UPLOAD_POLL = "upload-poll"
