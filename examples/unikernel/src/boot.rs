//! From QEMU's PVH entry to Rust: the ELF note that names the 32-bit entry point, page tables
//! that identity-map the low 4 GiB, long mode, a stack, and a call to [`crate::kmain`].
//!
//! PVH (the Xen x86/HVM direct boot ABI, which QEMU's `-kernel` loader speaks for an ELF with a
//! `XEN_ELFNOTE_PHYS32_ENTRY` note): the entry runs in 32-bit protected mode with paging off,
//! flat segments, and `ebx` holding the physical address of `hvm_start_info`. PVH rather than
//! multiboot: QEMU's multiboot loader refuses 64-bit ELF images, and the PVH start info hands
//! over the ACPI RSDP address, which is how the image finds the PCIe ECAM window (MCFG).
//!
//! The map: 2 MiB pages over 0..4 GiB, write-back below 2 GiB (RAM, the image, its DMA arena)
//! and uncached (PCD|PWT) above it, where q35 puts the ECAM window, the 32-bit BARs and the
//! local APIC. A BAR above 4 GiB is not mapped (`pci.rs` refuses it).

/// Bytes of the boot stack (the one stack of the image).
pub const STACK_BYTES: usize = 64 * 1024;

core::arch::global_asm!(
    r#"
    .section .note.pvh, "a", @note
    .p2align 2
    .long 4
    .long 4
    .long 18
    .asciz "Xen"
    .p2align 2
    .long pvh_start32
    .p2align 2

    .section .text.boot32, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    cld
    mov esi, ebx

    /* .bss to zero (the stack is in it and not used yet). */
    mov edi, offset __bss_start
    mov ecx, offset __bss_end
    sub ecx, edi
    xor eax, eax
    rep stosb

    /* PML4[0] -> PDPT; PDPT[0..4] -> four page directories of 2 MiB pages. */
    mov eax, offset boot_pdpt
    or eax, 3
    mov dword ptr [boot_pml4], eax
    xor ecx, ecx
2:
    mov eax, ecx
    shl eax, 12
    add eax, offset boot_pd
    or eax, 3
    mov dword ptr [boot_pdpt + ecx * 8], eax
    inc ecx
    cmp ecx, 4
    jne 2b
    xor ecx, ecx
3:
    mov eax, ecx
    shl eax, 21
    or eax, 0x83
    cmp ecx, 1024
    jb 4f
    or eax, 0x18
4:
    mov dword ptr [boot_pd + ecx * 8], eax
    inc ecx
    cmp ecx, 2048
    jne 3b

    /* PAE, then long mode (EFER.LME), then paging. */
    mov eax, cr4
    or eax, 0x20
    mov cr4, eax
    mov eax, offset boot_pml4
    mov cr3, eax
    mov ecx, 0xc0000080
    rdmsr
    or eax, 0x100
    wrmsr
    mov eax, cr0
    or eax, 0x80000001
    mov cr0, eax
    lgdt [boot_gdtr]
    /* ljmp 0x08:start64 */
    .byte 0xea
    .long start64
    .word 0x08

    .code64
start64:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    xor eax, eax
    mov fs, ax
    mov gs, ax
    lea rsp, [rip + boot_stack_top]
    mov edi, esi
    call kmain
5:
    cli
    hlt
    jmp 5b

    .section .rodata.boot, "a"
    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
boot_gdtr:
    .word 23
    .long boot_gdt

    .section .data.boot, "aw"
    .p2align 12
boot_pml4:
    .fill 4096, 1, 0
boot_pdpt:
    .fill 4096, 1, 0
boot_pd:
    .fill 16384, 1, 0

    .section .bss.boot, "aw", @nobits
    .p2align 12
    .global boot_stack
boot_stack:
    .skip {stack}
boot_stack_top:
    "#,
    stack = const STACK_BYTES,
);

extern "C" {
    /// The lowest byte of the boot stack (`boot.rs`'s assembly).
    static boot_stack: u8;
}

const PAINT: u8 = 0xa5;

fn stack_bottom() -> usize {
    core::ptr::addr_of!(boot_stack) as usize
}

/// Fills the unused part of the stack (below the caller's frame, less a margin) with a
/// pattern, for [`stack_used`].
#[inline(never)]
pub fn paint_stack() {
    let marker = 0u8;
    let here = core::ptr::addr_of!(marker) as usize;
    let bottom = stack_bottom();
    let end = here.saturating_sub(1024).max(bottom);
    // SAFETY: `bottom..end` is the boot stack below this frame and a 1 KiB margin: no live
    // data (the stack grows down and nothing has used this part since boot).
    unsafe { core::ptr::write_bytes(bottom as *mut u8, PAINT, end - bottom) };
}

/// Bytes of the stack ever used since [`paint_stack`]: from its top down to the lowest byte
/// no longer holding the pattern.
pub fn stack_used() -> usize {
    let bottom = stack_bottom();
    let mut p = bottom;
    // SAFETY: reads within the boot stack, below every live frame or inside them (bytes).
    while p < bottom + STACK_BYTES && unsafe { core::ptr::read_volatile(p as *const u8) } == PAINT {
        p += 1;
    }
    bottom + STACK_BYTES - p
}
