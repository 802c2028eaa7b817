# Helpers shared by scripts/test.sh and scripts/gpu-tests.sh (sourced, not run).
step() {
    printf '\n==> %s\n' "$*"
}
fail() {
    printf '\nFAILED: %s\n' "$*" >&2
    exit 1
}
elapsed() {
    printf '    (%ss)\n' "$((SECONDS - $1))"
}

# A Vulkan device wgpu can use: `vulkaninfo --summary` lists its deviceName.
vulkan_device() {
    command -v vulkaninfo >/dev/null 2>&1 \
        && vulkaninfo --summary 2>/dev/null | grep -m1 'deviceName' | sed 's/.*= *//'
}

# Makes sure wgpu has a Vulkan device for the wgpu tests (gpu/tests/wgpu.rs): on a machine
# without one, installs Mesa's llvmpipe (a CPU Vulkan driver) with apt-get when run as root
# (CI is), and otherwise fails saying how to install it.
ensure_vulkan() {
    local device
    if ! device="$(vulkan_device)" || [ -z "$device" ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            echo "    no Vulkan device: installing Mesa's llvmpipe (mesa-vulkan-drivers, vulkan-tools)"
            export DEBIAN_FRONTEND=noninteractive
            apt-get install -y -q mesa-vulkan-drivers vulkan-tools >/dev/null \
                || { apt-get update -q >/dev/null \
                    && apt-get install -y -q mesa-vulkan-drivers vulkan-tools >/dev/null; } \
                || fail "apt-get install mesa-vulkan-drivers vulkan-tools"
        fi
        device="$(vulkan_device)" || true
        [ -n "$device" ] || fail "no Vulkan device for the wgpu tests: install a GPU driver, or \
Mesa's CPU driver (Debian/Ubuntu: sudo apt-get install mesa-vulkan-drivers vulkan-tools)"
    fi
    echo "    Vulkan device: $device"
}
