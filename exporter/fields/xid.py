"""XID codes and the ``err_msg`` text dcgm-exporter attaches to ``DCGM_FI_DEV_XID_ERRORS`` (NVIDIA's XID list)."""

from __future__ import annotations

_NAMES = {
    0: "No Error", 7: "Invalid or corrupted push buffer address", 8: "GPU stopped processing",
    9: "Driver error programming GPU", 12: "Driver error handling GPU exception", 13: "Graphics Engine Exception",
    16: "Display engine hung", 18: "Bus mastering disabled in PCI Config Space", 19: "Display Engine error",
    20: "Invalid or corrupted Mpeg push buffer", 21: "Invalid or corrupted Motion Estimation push buffer",
    22: "Invalid or corrupted Video Processor push buffer", 24: "GPU semaphore timeout",
    25: "Invalid or illegal push buffer stream", 26: "Framebuffer timeout", 30: "GPU semaphore access error",
    31: "GPU memory page fault", 33: "Internal micro-controller error", 37: "Driver firmware error",
    38: "Driver firmware error", 43: "GPU stopped processing", 44: "Graphics Engine fault during context switch",
    45: "Preemptive cleanup, due to previous errors -- Most likely to see when running multiple cuda",
    46: "GPU stopped processing", 48: "Double Bit ECC Error", 54: "Auxiliary power is not connected to the GPU board",
    56: "Display Engine error", 57: "Error programming video memory interface",
    58: "Unstable video memory interface detected", 59: "Internal micro-controller error",
    61: "Internal micro-controller breakpoint/warning", 62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure", 66: "Illegal access by driver",
    67: "Illegal access by driver", 68: "NVDEC0 Exception", 69: "Graphics Engine class error",
    73: "NVENC2 Error", 74: "NVLINK Error", 78: "vGPU Start Error", 79: "GPU has fallen off the bus",
    80: "Corrupted data sent to GPU", 81: "VGA Subsystem Error", 82: "NVJPG0 Error", 83: "NVDEC1 Error",
    84: "NVDEC2 Error", 86: "OFA Exception", 88: "NVDEC3 Error", 89: "NVDEC4 Error",
    92: "High single-bit ECC error rate", 93: "Non-fatal violation of provisioned InfoROM wear limit",
    94: "Contained ECC error", 95: "Uncontained ECC error", 109: "Context Switch Timeout Error",
    110: "Security Fault Error", 119: "GSP RPC Timeout", 120: "GSP Error", 121: "C2C Link Error",
    136: "ALI Training Fail", 137: "NVLink Privilege Error", 140: "Unrecovered ECC Error",
    143: "GPU Initialization Failure", 154: "GPU Recovery Action Changed", 155: "NVLINK: SW Defined Error",
    156: "Resource Retirement Event", 157: "Resource Retirement Failure", 158: "GPU Fatal Timeout",
    167: "PCIE Fatal Timeout", 171: "Uncorrectable DRAM Error", 172: "Uncorrectable SRAM Error",
    106: "SMBPBI Test Message", 107: "SMBPBI Test Message Silent", 111: "Display Bundle Error Event",
    112: "Display Supervisor Error", 113: "DP Link Training Error", 114: "Display Pipeline Underflow Error",
    115: "Display Core Channel Error", 116: "Display Window Channel Error", 117: "Display Cursor Channel Error",
    118: "Display Pixel Pipeline Error", 122: "SPI PMU RPC Read Failure", 123: "SPI PMU RPC Write Failure",
    124: "SPI PMU RPC Erase Failure", 125: "Inforom FS Failure", 138: "Robust Channel DLA Error",
    139: "Robust Channel OFA1 Error", 141: "Robust Channel Fast Path Error", 142: "Robust Channel NVENVC3 Error",
    144: "NVLINK: Saw Error", 145: "NVLINK: RLW Error", 146: "NVLINK: TLW Error", 147: "NVLINK: TREX Error",
    148: "NVLINK: NVLPW_CTRL Error", 149: "NVLINK: NETIR Error", 150: "NVLINK: MSE Error",
    151: "Robust Channel Key rotation Error", 152: "Robust Channel DLA SMMU Error",
    153: "Robust Channel DLA timeout Error", 159: "Robust Channel CHI Non-Data Error",
    160: "Channel Retirement Event", 161: "Channel Retirement Failure",
    162: "Power Smoothing HW Circuitry Reengaged", 163: "Power Smoothing HW Circuitry Disengaged",
    164: "Power Smoothing HW Circuitry Low Lifetime", 165: "Power Smoothing HW Circuitry Lifetime Exhausted",
    166: "NVLINK Secure Crypto Error", 168: "Reduced GPU Memory Capacity (Errors found in write protection region)",
    169: "Internal micro-controller halt", 170: "NVLINK: Interrupt seen in CC mode",
}
_VIDEO = {27, 28, 29, 34, 35, 36, 42, 47, 60, 65}
_PUSH_BUFFER = {1, 2, 3, 4, 6, 11, 32}
_UNUSED = {5, 10, 14, 15, 17, 23, 39, 40, 41, 49, 50, 51, 52, 53, 55}
_RESERVED = {87, 90, 91, 108}
_COPY_ENGINES = {70: 3, 71: 4, 72: 5, 75: 6, 76: 7, 77: 8, 85: 9}


def xid_message(xid: int) -> str:
    """The ``err_msg`` label value for an XID code; ``Unknown Error`` outside the documented range."""
    if xid in _NAMES:
        return _NAMES[xid]
    if xid in _PUSH_BUFFER:
        return "Invalid or corrupted push buffer stream"
    if xid in _VIDEO:
        return "Video processor exception"
    if xid in _UNUSED:
        return "Unused"
    if xid in _RESERVED:
        return "Reserved"
    if xid in _COPY_ENGINES:
        return f"CE{_COPY_ENGINES[xid]}: Unknown Error"
    if 96 <= xid <= 98:
        return f"NVDEC{xid - 91} Error"
    if 99 <= xid <= 105:
        return f"NVJPG{xid - 98} Error"
    if 126 <= xid <= 135:
        return f"Robust Channel CE{xid - 116} Error"
    return "Unknown Error"

