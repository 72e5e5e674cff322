//! The ACL command (Redis 7.0's `aclCommand`): SETUSER GETUSER DELUSER
//! USERS LIST WHOAMI CAT DRYRUN GENPASS LOG HELP, and LOAD/SAVE refused as
//! Redis refuses them without an ACL file. The users are the executor's
//! [`super::acl::Users`].

use super::acl::category_names;
use super::acl_table::CATEGORIES;
use super::{commands, find_command, Ctx, Fail, Res};
use crate::store::Keyspace;
use pmwire_resp::reply::ReplySink;

type C<'a, 'b, 'r, K, S> = &'a mut Ctx<'b, 'r, K, S>;

/// ACL SETUSER name rule...: all the rules or none.
pub(super) fn setuser<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let name = c.arg(2);
    if name.iter().any(|&b| b.is_ascii_whitespace() || b == 0) {
        return Err(Fail::err("Usernames can't contain spaces or null characters"));
    }
    let rules: Vec<&[u8]> = (3..c.argc()).map(|j| c.arg(j)).collect();
    c.server.sync_requirepass();
    c.server.users.set_user(name, &rules).map_err(Fail::Text)?;
    c.out.ok();
    Ok(())
}

/// ACL DELUSER name...: how many existed; their connections are closed.
pub(super) fn deluser<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let names: Vec<&[u8]> = (2..c.argc()).map(|j| c.arg(j)).collect();
    if names.iter().any(|n| *n == b"default") {
        return Err(Fail::err("The 'default' user cannot be removed"));
    }
    let deleted = c.server.users.delete(&names);
    // Redis's ACLFreeUserAndKillClients: the users' connections are closed.
    let mut gone: Vec<u64> = c.server.clients.iter().filter(|(_, i)| names.contains(&&*i.user)).map(|(&id, _)| id).collect();
    if names.contains(&c.session.user()) && !gone.contains(&c.session.id()) {
        gone.push(c.session.id());
    }
    gone.sort_unstable();
    c.server.kills.extend(gone);
    c.out.integer(deleted as i64);
    Ok(())
}

/// ACL GETUSER name: the user's flags, password hashes and permissions.
pub(super) fn getuser<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.server.sync_requirepass();
    let Some((flags, passwords, root, selectors)) = c.server.users.details(c.arg(2)) else {
        c.out.null();
        return Ok(());
    };
    c.out.map(6);
    c.out.bulk(b"flags");
    c.out.set(flags.len());
    flags.iter().for_each(|f| c.out.bulk(f.as_bytes()));
    c.out.bulk(b"passwords");
    c.out.array(passwords.len());
    passwords.iter().for_each(|p| c.out.bulk(p.as_bytes()));
    let describe = |c: &mut Ctx<'_, '_, K, S>, s: &[String; 3]| {
        for (field, value) in ["commands", "keys", "channels"].iter().zip(s) {
            c.out.bulk(field.as_bytes());
            c.out.bulk(value.as_bytes());
        }
    };
    describe(c, &root);
    c.out.bulk(b"selectors");
    c.out.array(selectors.len());
    for s in &selectors {
        c.out.map(3);
        describe(c, s);
    }
    Ok(())
}

/// ACL USERS: the names, sorted.
pub(super) fn users<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let names: Vec<Vec<u8>> = c.server.users.names().map(<[u8]>::to_vec).collect();
    c.out.array(names.len());
    names.iter().for_each(|n| c.out.bulk(n));
    Ok(())
}

/// ACL LIST: each user as the rules that make it.
pub(super) fn list<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    c.server.sync_requirepass();
    let users = &c.server.users;
    let lines: Vec<String> = users.names().filter_map(|n| users.describe(n)).collect();
    c.out.array(lines.len());
    lines.iter().for_each(|l| c.out.bulk(l.as_bytes()));
    Ok(())
}

/// ACL WHOAMI: the connection's user.
pub(super) fn whoami<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let user = c.session.user().to_vec();
    c.out.bulk(&user);
    Ok(())
}

/// ACL CAT [category]: the categories, or the commands (and subcommands)
/// this server serves in one.
pub(super) fn cat<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() == 2 {
        c.out.array(CATEGORIES.len());
        CATEGORIES.iter().for_each(|n| c.out.bulk(n.as_bytes()));
        return Ok(());
    }
    if c.argc() != 3 {
        return Err(subcommand_syntax(c));
    }
    let wanted = c.arg(2);
    let Some(category) = CATEGORIES.iter().find(|n| n.as_bytes().eq_ignore_ascii_case(wanted)) else {
        let given = String::from_utf8_lossy(&wanted[..wanted.len().min(128)]).into_owned();
        return Err(Fail::err(&format!("Unknown category '{given}'")));
    };
    let names: Vec<&str> = commands::table().iter().filter(|r| category_names(r.name).any(|n| n == *category)).map(|r| r.name).collect();
    c.out.array(names.len());
    names.iter().for_each(|n| c.out.bulk(n.as_bytes()));
    Ok(())
}

/// ACL DRYRUN user command [arg...]: whether the user may run it.
pub(super) fn dryrun<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    let user = c.arg(2);
    c.server.sync_requirepass();
    if !c.server.users.exists(user) {
        return Err(Fail::err(&format!("User '{}' not found", String::from_utf8_lossy(user))));
    }
    let argv: Vec<&[u8]> = (3..c.argc()).map(|j| c.arg(j)).collect();
    let info = match find_command(argv.len(), |i| argv[i]) {
        Ok(info) => info,
        Err(e) if e.starts_with("ERR wrong number") => return Err(Fail::Text(e)),
        Err(_) => return Err(Fail::err(&format!("Command '{}' not found", String::from_utf8_lossy(argv[0])))),
    };
    let no_auth = info.flags.contains(commands::Flags::NO_AUTH);
    match c.server.users.check(user, info.name, no_auth, &argv) {
        Ok(()) => c.out.ok(),
        Err(denied) => {
            let text = match denied {
                super::acl::Denied::Command => format!("This user has no permissions to run the '{}' command", info.name),
                super::acl::Denied::Key(p) => format!("This user has no permissions to access the '{}' key", String::from_utf8_lossy(argv[p])),
                super::acl::Denied::Channel(p) => format!("This user has no permissions to access the '{}' channel", String::from_utf8_lossy(argv[p])),
            };
            c.out.bulk(text.as_bytes());
        }
    }
    Ok(())
}

/// Most bits ACL GENPASS makes.
const GENPASS_MAX_BITS: i64 = 4096;

/// ACL GENPASS [bits]: a random password, hex, from the kernel's generator.
pub(super) fn genpass<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(subcommand_syntax(c));
    }
    let bits = if c.argc() == 3 { c.int_arg(2)? } else { 256 };
    if bits <= 0 || bits > GENPASS_MAX_BITS {
        return Err(Fail::err(&format!("ACL GENPASS argument must be the number of bits for the output password, a positive number up to {GENPASS_MAX_BITS}")));
    }
    let chars = ((bits + 3) / 4) as usize;
    let mut random = vec![0u8; chars.div_ceil(2)];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .map_err(|e| Fail::err(&format!("ACL GENPASS could not read the system's random source: {e}")))?;
    let hex: String = random.iter().map(|b| format!("{b:02x}")).collect();
    c.out.bulk(&hex.as_bytes()[..chars]);
    Ok(())
}

/// ACL LOG [count | RESET]: the newest refusals first.
pub(super) fn log<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    if c.argc() > 3 {
        return Err(subcommand_syntax(c));
    }
    let mut count = 10i64;
    if c.argc() == 3 {
        if c.arg(2).eq_ignore_ascii_case(b"reset") {
            c.server.users.log.clear();
            c.out.ok();
            return Ok(());
        }
        count = c.int_arg(2)?.max(0);
    }
    let now = c.ks.now_ms();
    let entries: Vec<_> = c.server.users.log.iter().take(usize::try_from(count).unwrap_or(usize::MAX)).cloned().collect();
    c.out.array(entries.len());
    for e in entries {
        c.out.map(7);
        c.out.bulk(b"count");
        c.out.integer(i64::try_from(e.count).unwrap_or(i64::MAX));
        for (field, value) in [("reason", e.reason.as_bytes()), ("context", e.context.as_bytes()), ("object", &e.object), ("username", &e.username)] {
            c.out.bulk(field.as_bytes());
            c.out.bulk(value);
        }
        c.out.bulk(b"age-seconds");
        c.out.double(now.saturating_sub(e.ctime_ms) as f64 / 1000.0);
        c.out.bulk(b"client-info");
        c.out.bulk(e.client_info.as_bytes());
    }
    Ok(())
}

/// ACL LOAD and ACL SAVE: pmwire keeps users in memory only.
pub(super) fn load_save<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(_c: C<'_, '_, '_, K, S>) -> Res {
    Err(Fail::err("This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration."))
}

/// ACL HELP.
pub(super) fn help<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Res {
    const HELP: &[&str] = &[
        "CAT [<category>]",
        "    List all commands that belong to <category>, or all command categories",
        "    when no category is specified.",
        "DELUSER <username> [<username> ...]",
        "    Delete a list of users.",
        "DRYRUN <username> <command> [<arg> ...]",
        "    Returns whether the user can execute the given command without executing the command.",
        "GETUSER <username>",
        "    Get the user's details.",
        "GENPASS [<bits>]",
        "    Generate a secure 256-bit user password. The optional `bits` argument can",
        "    be used to specify a different size.",
        "LIST",
        "    Show users details in config file format.",
        "LOAD",
        "    Reload users from the ACL file.",
        "LOG [<count> | RESET]",
        "    Show the ACL log entries.",
        "SAVE",
        "    Save the current config to the ACL file.",
        "SETUSER <username> <attribute> [<attribute> ...]",
        "    Create or modify a user with the specified attributes.",
        "USERS",
        "    List all the registered usernames.",
        "WHOAMI",
        "    Return the current connection username.",
    ];
    let name = c.arg(0).to_ascii_uppercase();
    c.out.array(HELP.len() + 3);
    c.out.simple(format!("{} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:", String::from_utf8_lossy(&name)).as_bytes());
    HELP.iter().for_each(|l| c.out.simple(l.as_bytes()));
    c.out.simple(b"HELP");
    c.out.simple(b"    Prints this help.");
    Ok(())
}

/// Redis's `addReplySubcommandSyntaxError`.
fn subcommand_syntax<K: Keyspace, S: ReplySink<K::Value> + ?Sized>(c: C<'_, '_, '_, K, S>) -> Fail {
    let sub = c.arg(1);
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]).into_owned();
    Fail::err(&format!("unknown subcommand or wrong number of arguments for '{sub}'. Try {} HELP.", String::from_utf8_lossy(&c.arg(0).to_ascii_uppercase())))
}
