//! `gelstore device …`: this device's keys and the account's devices (on the
//! global `--data` folder).
//!
//! Exit codes: 0 success; 1 the operation was refused (a bad pairing code,
//! a device not approved yet, a read-only copy, an unknown device, a CAR
//! that does not verify), with a message on stderr and nothing changed; 2
//! usage, or an environment failure (I/O, a key file others can read, the
//! store locked by another process).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{Failure, Format, Outcome, finish, say};
use crate::device::{self, DeviceError, DeviceListing};
use crate::repo::car::CarError;
use crate::repo::key_file::KeyFileError;
use crate::repo::repository::Refresh;
use crate::repo::repository::RepoError;
use crate::seal::keys::hex;
use crate::seal::{PairingCode, SealError, os_rng};

#[derive(Subcommand, Debug)]
pub enum DeviceCommand {
    /// Set up the first device of an account: the device key, the account
    /// key and their records (and the repository, if missing). Idempotent;
    /// prints this device's id.
    Init(InitArgs),
    /// On a new device: make its key and print a pairing code to approve on
    /// a paired device. Prints the same code until the pairing completes.
    Pair(PairArgs),
    /// On a paired device: admit the new device whose code is given; prints
    /// its id.
    Approve(ApproveArgs),
    /// On the new device: complete a pending pairing from the records a
    /// `gelstore sync` brought in, or (`--from`) take in the account's
    /// records from a CAR exported by the device that holds the repository
    /// (`gelstore repo export`); run that again with a newer export to
    /// refresh the copy.
    Join(JoinArgs),
    /// List the account's devices: which are admitted, and the current
    /// account epoch.
    Ls(FormatArg),
    /// Remove a device: start a new account-key epoch without it. Records
    /// sealed from then on use keys it never gets.
    Remove(RemoveArgs),
    /// Resolve a forked account epoch (two removals made at once, or a
    /// rotation a removed device forged): start the next epoch for the
    /// devices every rotation kept.
    Resolve(FormatArg),
}

#[derive(Args, Debug)]
pub struct FormatArg {
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct PairArgs {
    /// Also write this device's `device` record into the data folder's own
    /// repository (made if missing), for pairing through a PDS: `gelstore
    /// sync` pushes it, a paired device approves the code and syncs, then
    /// `gelstore sync` and `gelstore device join` here.
    #[arg(long)]
    pub publish: bool,
    /// What to call this device (in its `device` record, with --publish).
    #[arg(long, requires = "publish")]
    pub name: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct InitArgs {
    /// What to call this device (in its `device` record).
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct ApproveArgs {
    /// The pairing code the new device shows (`gp1-…`).
    pub code: String,
    /// What to call the new device (in its `device` record).
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct JoinArgs {
    /// The repository CAR exported by the device that holds the repository
    /// (without it: the records already in this store, brought by sync).
    #[arg(long, value_name = "FILE.car")]
    pub from: Option<PathBuf>,
    /// The DID the account's records are sealed for (`gelstore device ls`
    /// on a paired device shows it). Without it: through a PDS, the DID of
    /// the account this store's sync logged into; with --from, the
    /// exported repository's own DID (give the account's DID when the
    /// store it comes from is linked to an account).
    #[arg(long, value_name = "DID")]
    pub account_did: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(Args, Debug)]
pub struct RemoveArgs {
    /// The device's id (its record key, as `device ls` shows it).
    pub id: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

impl From<DeviceError> for Failure {
    fn from(e: DeviceError) -> Self {
        Failure {
            outcome: if is_environment(&e) {
                Outcome::Failed
            } else {
                Outcome::Findings
            },
            message: e.to_string(),
        }
    }
}

/// Whether a device error is the environment's (exit 2: I/O, key file
/// permissions, a locked store) rather than a refusal (exit 1).
pub(super) fn is_environment(e: &DeviceError) -> bool {
    match e {
        DeviceError::Io { .. }
        | DeviceError::StateFile { .. }
        | DeviceError::Seal(SealError::KeyFile { .. }) => true,
        DeviceError::Repo(repo) => matches!(
            **repo,
            RepoError::Engine(_)
                | RepoError::KeyFile(KeyFileError::Io { .. })
                | RepoError::KeyFile(KeyFileError::Permissions { .. })
                | RepoError::Car(CarError::Io(_))
        ),
        _ => false,
    }
}

type Result<T> = std::result::Result<T, Failure>;

pub fn run(data: &Path, cmd: DeviceCommand) -> Outcome {
    let result = match cmd {
        DeviceCommand::Init(a) => init(data, a),
        DeviceCommand::Pair(a) => pair(data, a),
        DeviceCommand::Approve(a) => approve(data, a),
        DeviceCommand::Join(a) => join(data, a),
        DeviceCommand::Ls(a) => ls(data, a.format),
        DeviceCommand::Remove(a) => remove(data, a),
        DeviceCommand::Resolve(a) => resolve(data, a.format),
    };
    finish(result)
}

fn init(data: &Path, args: InitArgs) -> Result<()> {
    let out = device::init(data, args.name.as_deref(), &mut os_rng())?;
    match args.format {
        Format::Human => {
            say(&out.device);
            if out.created {
                eprintln!(
                    "device {} set up for {} (account epoch 0)",
                    out.device, out.did
                );
            } else {
                eprintln!("device {} was already set up for {}", out.device, out.did);
            }
        }
        Format::Json => say(json!({
            "device": out.device,
            "did": out.did,
            "created": out.created,
        })),
    }
    Ok(())
}

fn pair(data: &Path, args: PairArgs) -> Result<()> {
    let out = device::pair(data, &mut os_rng())?;
    let published = if args.publish {
        Some(device::publish(data, args.name.as_deref())?)
    } else {
        None
    };
    match args.format {
        Format::Human => {
            say(&out.code);
            eprintln!(
                "approve this code on a paired device: gelstore device approve {}",
                out.code
            );
            if let Some(id) = &published {
                eprintln!(
                    "device record {id} written: run gelstore sync here, then on the paired device sync, approve and sync again; then here: gelstore sync, gelstore device join"
                );
            } else {
                eprintln!(
                    "then export that device's repository (gelstore repo export --out FILE.car) and run here: gelstore device join --from FILE.car"
                );
            }
        }
        Format::Json => say(json!({
            "code": out.code.to_string(),
            "created": out.created,
            "device": published,
        })),
    }
    Ok(())
}

fn approve(data: &Path, args: ApproveArgs) -> Result<()> {
    let code: PairingCode = args.code.parse().map_err(DeviceError::from)?;
    let out = device::approve(data, &code, args.name.as_deref(), &mut os_rng())?;
    match args.format {
        Format::Human => {
            say(&out.device);
            if out.already_admitted {
                eprintln!(
                    "device {} is already admitted (epoch {}); nothing written",
                    out.device, out.epoch
                );
            } else {
                eprintln!(
                    "approved device {} (account epoch {}); now run gelstore sync here, then on the new device: gelstore sync, gelstore device join (without a PDS: gelstore repo export --out FILE.car here, gelstore device join --from FILE.car there)",
                    out.device, out.epoch
                );
            }
        }
        Format::Json => say(json!({
            "device": out.device,
            "epoch": out.epoch,
            "recordCreated": out.record_created,
            "alreadyAdmitted": out.already_admitted,
        })),
    }
    Ok(())
}

fn join(data: &Path, args: JoinArgs) -> Result<()> {
    let out = match &args.from {
        Some(car) => device::join(data, car, args.account_did.as_deref())?,
        None => device::join_synced(data, args.account_did.as_deref())?,
    };
    let refresh = match out.refresh {
        Some(Refresh::Imported) => "imported",
        Some(Refresh::Replaced) => "replaced",
        None => "synced",
    };
    match args.format {
        Format::Human => {
            say(&out.device);
            if out.newly_paired {
                eprintln!(
                    "paired as device {} of {} (account epoch {})",
                    out.device, out.did, out.epoch
                );
            }
            if out.refresh.is_some() {
                eprintln!(
                    "read-only copy {refresh}: {} record(s); this device holds account epoch {}",
                    out.records, out.epoch
                );
            } else {
                eprintln!(
                    "joined from the synced records: {} record(s); this device holds account epoch {}",
                    out.records, out.epoch
                );
            }
            if out.newest_epoch > out.epoch {
                eprintln!(
                    "warning: the verified membership log is at account epoch {}, newer than this device holds: it was removed (or a rotation has not reached it) and cannot open what is sealed in that epoch",
                    out.newest_epoch
                );
            }
        }
        Format::Json => say(json!({
            "device": out.device,
            "did": out.did,
            "newlyPaired": out.newly_paired,
            "refresh": refresh,
            "records": out.records,
            "epoch": out.epoch,
            "newestEpoch": out.newest_epoch,
        })),
    }
    Ok(())
}

fn listing_json(l: &DeviceListing) -> Value {
    json!({
        "id": l.entry.id,
        "status": l.status.as_str(),
        "this": l.this,
        "publicKey": hex(&l.entry.public_key),
        "name": l.entry.name,
        "createdAt": l.entry.created_at,
    })
}

fn ls(data: &Path, format: Format) -> Result<()> {
    let dev = device::Device::open(data)?;
    let listing = dev.list();
    let epoch = dev.keyring().held_epoch();
    match format {
        Format::Human => {
            say(format_args!("account  {}", dev.account_did()));
            let why = match dev.standing_error() {
                Some(crate::seal::SealError::NotAdmitted {
                    epoch: now,
                    removed: true,
                }) => {
                    format!(" (the membership log is at epoch {now}: this device was removed)")
                }
                Some(crate::seal::SealError::NotAdmitted { epoch: now, .. }) => {
                    format!(
                        " (the membership log is at epoch {now}: this device is not in its roster)"
                    )
                }
                Some(crate::seal::SealError::AccountKeyPending { epoch: now, .. }) => {
                    format!(
                        " (the membership log is at epoch {now}: its key has not reached this device yet)"
                    )
                }
                _ => String::new(),
            };
            say(format_args!("epoch    {epoch}{why}"));
            for l in &listing {
                say(format_args!(
                    "{}  {:<12}  {}…{}{}",
                    l.entry.id,
                    l.status.as_str(),
                    &hex(&l.entry.public_key)[..16],
                    l.entry
                        .name
                        .as_deref()
                        .map(|n| format!("  {n:?}"))
                        .unwrap_or_default(),
                    if l.this { "  (this device)" } else { "" }
                ));
            }
            for s in dev.skipped_records() {
                eprintln!("warning: skipped a record that does not decode: {s}");
            }
            if let Some(f) = dev.keyring().fork() {
                eprintln!(
                    "warning: {}",
                    crate::seal::SealError::MembershipFork {
                        epoch: f.epoch,
                        next: f.epoch + 1,
                        left_out: f.left_out
                    }
                );
            }
            if let Some(held) = dev.rolled_back() {
                eprintln!(
                    "warning: {}",
                    device::DeviceError::MembershipRolledBack { held, now: epoch }
                );
            }
        }
        Format::Json => {
            let devices: Vec<Value> = listing.iter().map(listing_json).collect();
            say(json!({
                "did": dev.account_did(),
                "device": dev.id(),
                "epoch": epoch,
                "newestEpoch": dev.newest_epoch(),
                "heldEpoch": dev.rolled_back().unwrap_or(epoch),
                "rolledBack": dev.rolled_back().is_some(),
                "fork": dev.keyring().fork().map(|f| json!({"epoch": f.epoch, "keyIds": f.key_ids, "leftOut": f.left_out})),
                "devices": devices,
                "skippedRecords": dev.skipped_records(),
            }))
        }
    }
    Ok(())
}

fn resolve(data: &Path, format: Format) -> Result<()> {
    let epoch = device::resolve(data, &mut os_rng())?;
    match format {
        Format::Human => {
            say(format_args!("epoch {epoch}"));
            eprintln!(
                "resolved: account epoch {epoch} starts now, for the devices every rotation of the forked epoch kept"
            );
        }
        Format::Json => say(json!({ "epoch": epoch })),
    }
    Ok(())
}

fn remove(data: &Path, args: RemoveArgs) -> Result<()> {
    let epoch = device::remove(data, &args.id, &mut os_rng())?;
    match args.format {
        Format::Human => {
            say(format_args!("epoch {epoch}"));
            eprintln!(
                "removed device {}: account epoch {epoch} starts now; records sealed from now on use keys it never gets (it keeps what it could already read)",
                args.id
            );
        }
        Format::Json => say(json!({"removed": args.id, "epoch": epoch})),
    }
    Ok(())
}
