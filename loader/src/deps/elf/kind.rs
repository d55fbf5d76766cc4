//! The class, byte order and machine of an ELF file: what the dynamic
//! loader compares with its own before it maps a library.

use object::elf::{
    EM_386, EM_AARCH64, EM_ARM, EM_LOONGARCH, EM_PPC64, EM_RISCV, EM_S390, EM_X86_64,
};
use std::fmt;

/// What the loader compares before it accepts a file: class, byte order
/// and machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElfKind {
    pub class64: bool,
    pub little_endian: bool,
    /// `e_machine` (62 is x86-64). 0 (`EM_NONE`) in an expectation means
    /// "any machine".
    pub machine: u16,
}

impl ElfKind {
    /// The kind of the code this program was compiled to, for when the
    /// running executable cannot be read.
    pub fn compiled() -> ElfKind {
        let machine = match std::env::consts::ARCH {
            "x86_64" => EM_X86_64,
            "x86" => EM_386,
            "aarch64" => EM_AARCH64,
            "arm" => EM_ARM,
            "riscv64" => EM_RISCV,
            "powerpc64" => EM_PPC64,
            "s390x" => EM_S390,
            "loongarch64" => EM_LOONGARCH,
            _ => 0,
        };
        ElfKind {
            class64: cfg!(target_pointer_width = "64"),
            little_endian: cfg!(target_endian = "little"),
            machine,
        }
    }

    pub fn class_name(&self) -> &'static str {
        if self.class64 {
            "ELFCLASS64"
        } else {
            "ELFCLASS32"
        }
    }

    /// A name for `e_machine`, for messages.
    pub fn machine_name(&self) -> String {
        match self.machine {
            EM_386 => "i386".into(),
            EM_ARM => "ARM".into(),
            EM_X86_64 => "x86-64".into(),
            EM_AARCH64 => "AArch64".into(),
            EM_RISCV => "RISC-V".into(),
            EM_PPC64 => "PowerPC64".into(),
            EM_S390 => "S/390".into(),
            EM_LOONGARCH => "LoongArch".into(),
            m => format!("machine {m}"),
        }
    }
}

impl fmt::Display for ElfKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {}",
            self.class_name(),
            if self.little_endian { "LSB" } else { "MSB" },
            self.machine_name()
        )
    }
}
