#!/usr/bin/perl

# TLS sessions shared by all workers: with worker_processes 2 (reuseport
# spreads connections over both), a session saved by openssl s_client
# resumes whichever worker accepts it: from ssl_session_cache shared: (TLS
# 1.2 session ids, TLS 1.3 stateful tickets) and from tickets sealed with
# the master's keys (TLS 1.2 and 1.3), also after a reload and after a
# binary upgrade; ssl_session_ticket_key files (a ticket one instance made
# resumes on another with the same file); a ticket no key opens, or
# garbage, gets a full handshake and no crash. How many tickets come, as
# from OpenSSL: TLS 1.3, two after a full handshake, one after a
# resumption; TLS 1.2, a ticket renewed only when an older key sealed it.

use warnings;
use strict;

use Test::More;
use IO::Select;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

`openssl version 2>&1` =~ /^OpenSSL/ or plan(skip_all => 'no openssl command');

my $t = Test::Sluice->new()->has(qw/http/)->plan(32);
my $d = $t->testdir();

system("cd $d && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
	. " -keyout c.key -out c.crt -days 3 -subj /CN=c >/dev/null 2>&1") == 0 or die;
system("head -c 80 /dev/urandom > $d/ticket.key") == 0 or die;
system("head -c 80 /dev/urandom > $d/new.key") == 0 or die;

my $conf = <<'EOF';

%%TEST_GLOBALS%%
worker_processes 2;

events {
}

http {
    access_log off;

    ssl_certificate     c.crt;
    ssl_certificate_key c.key;

    server {
        listen 127.0.0.1:%%PORT_8443%% ssl reuseport;
        ssl_session_cache shared:SSL:1m;
        ssl_session_tickets off;
        location / { return 200 "pid=$pid reused=$ssl_session_reused $ssl_protocol\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8444%% ssl reuseport;
        location / { return 200 "pid=$pid reused=$ssl_session_reused $ssl_protocol\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8445%% ssl reuseport;
        ssl_session_ticket_key ticket.key;
        location / { return 200 "pid=$pid reused=$ssl_session_reused $ssl_protocol\n"; }
    }

    server {
        listen 127.0.0.1:%%PORT_8446%% ssl reuseport;
        ssl_session_ticket_key new.key;
        ssl_session_ticket_key ticket.key;
        location / { return 200 "pid=$pid reused=$ssl_session_reused $ssl_protocol\n"; }
    }
}

EOF
$t->write_file_expand('sluice.conf', $conf);
$t->run();

# One request with openssl s_client: (pid, reused) from the response;
# $sess: 'sess_out' saves the session to $file, 'sess_in' offers it.
sub s_client {
	my ($port, $v, $sess, $file) = @_;
	my $p = port($port);
	my $r = `printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 openssl s_client -connect 127.0.0.1:$p $v -$sess $d/$file -quiet -ign_eof 2>/dev/null`;
	my ($pid, $reused) = $r =~ /pid=(\d+) reused=(\S)/;
	return ($pid // 0, $reused // 'none');
}

# Saves a session, then offers it $n times, and more (up to 6 x $n) until
# both workers answered: which worker accepts is the kernel's choice, and
# under load one may win many in a row. Returns (how many offers were not
# resumed, pids seen).
sub resume_many {
	my ($port, $v, $n) = @_;
	s_client($port, $v, 'sess_out', "s$port$v.pem");
	my ($missed, %pids) = (0);
	for my $i (1 .. 6 * $n) {
		last if $i > $n && keys %pids >= 2;
		my ($pid, $r) = s_client($port, $v, 'sess_in', "s$port$v.pem");
		$missed++ if $r ne 'r';
		$pids{$pid}++ if $pid;
	}
	return ($missed, scalar keys %pids);
}

# The shared cache: TLS 1.2 session ids, offered again and again.

my ($missed, $pids) = resume_many(8443, '-tls1_2', 12);
is($missed, 0, 'shared cache, TLSv1.2: every offer resumed');
ok($pids >= 2, 'shared cache, TLSv1.2: on both workers');

# TLS 1.3 stateful tickets are used once: a new session each time, and
# some resumed on the other worker than the one that made it.

my ($ok13, $cross) = (0, 0);
for (1 .. 12) {
	my ($made) = s_client(8443, '-tls1_3', 'sess_out', 's13.pem');
	my ($pid, $r) = s_client(8443, '-tls1_3', 'sess_in', 's13.pem');
	$ok13++ if $r eq 'r';
	$cross++ if $pid != $made;
}
is($ok13, 12, 'shared cache, TLSv1.3: every session resumed');
ok($cross >= 1, 'shared cache, TLSv1.3: resumed on the other worker');

# Tickets sealed with the master's keys.

for my $v (qw/-tls1_2 -tls1_3/) {
	($missed, $pids) = resume_many(8444, $v, 10);
	is($missed, 0, "tickets $v: every offer resumed");
	ok($pids >= 2, "tickets $v: on both workers");
}

# How many tickets the server sends: (reused, NewSessionTicket messages)
# of one handshake with openssl s_client -msg; $in: a session file to
# offer, $out: where to save the session.
sub tickets {
	my ($port, $v, $in, $out) = @_;
	my $p = port($port);
	my $sess = ($in ? "-sess_in $d/$in " : '') . ($out ? "-sess_out $d/$out" : '');
	my $r = `printf 'GET / HTTP/1.0\r\n\r\n' | timeout 10 openssl s_client -connect 127.0.0.1:$p $v $sess -msg -ign_eof 2>/dev/null`;
	my ($reused) = $r =~ /reused=(\S)/;
	my $n = () = $r =~ /^<<< .*NewSessionTicket/mg;
	return ($reused // 'none') . " $n";
}

is(tickets(8444, '-tls1_3', undef, 't13.pem'), '. 2', 'TLSv1.3 full handshake: two tickets');
is(tickets(8444, '-tls1_3', 't13.pem'), 'r 1', 'TLSv1.3 resumed: one ticket');
is(tickets(8444, '-tls1_2', undef, 't12.pem'), '. 1', 'TLSv1.2 full handshake: a ticket');
is(tickets(8444, '-tls1_2', 't12.pem'), 'r 0', 'TLSv1.2 resumed: the ticket is not renewed');
is(tickets(8444, '-tls1_2', 't12.pem'), 'r 0', 'TLSv1.2 resumed again with the same ticket');

# Server 8446 seals with new.key and opens ticket.key's tickets too: a
# ticket 8445 made resumes there and is renewed; one it made itself is
# not; 8445 does not know new.key.

tickets(8445, '-tls1_2', undef, 'o12.pem');
is(tickets(8446, '-tls1_2', 'o12.pem'), 'r 1', 'TLSv1.2 ticket of an older key: renewed');
is(tickets(8446, '-tls1_2', undef, 'n12.pem'), '. 1', 'TLSv1.2 full handshake, current key');
is(tickets(8446, '-tls1_2', 'n12.pem'), 'r 0', 'TLSv1.2 ticket of the current key: not renewed');
is(tickets(8445, '-tls1_2', 'n12.pem'), '. 1', 'ticket of a key not known: full handshake, a ticket');
tickets(8445, '-tls1_3', undef, 'o13.pem');
is(tickets(8446, '-tls1_3', 'o13.pem'), 'r 1', 'TLSv1.3 ticket of an older key resumes');

# Across a reload: the tickets' keys and the cache zone stay.

s_client(8444, '-tls1_3', 'sess_out', 'r13.pem');
s_client(8444, '-tls1_2', 'sess_out', 'r12.pem');
s_client(8443, '-tls1_2', 'sess_out', 'rc.pem');
my @before = $t->worker_pids();
ok($t->reload(), 'reloaded');
ok(poll_until(sub { my %b = map { $_ => 1 } @before; !grep { $b{$_} } $t->worker_pids() }, 10),
	'old workers gone');
is((s_client(8444, '-tls1_3', 'sess_in', 'r13.pem'))[1], 'r', 'TLSv1.3 ticket resumes after reload');
is((s_client(8444, '-tls1_2', 'sess_in', 'r12.pem'))[1], 'r', 'TLSv1.2 ticket resumes after reload');
is((s_client(8443, '-tls1_2', 'sess_in', 'rc.pem'))[1], 'r', 'cached session resumes after reload');

# ssl_session_ticket_key: another instance with the same key file opens
# the tickets this one made; a ticket of the master's keys it does not.

s_client(8445, '-tls1_3', 'sess_out', 'k13.pem');
s_client(8445, '-tls1_2', 'sess_out', 'k12.pem');
my $t2 = Test::Sluice->new()->has(qw/http/);
my $d2 = $t2->testdir();
system("cp $d/c.crt $d/c.key $d/ticket.key $d/new.key $d2/") == 0 or die;
(my $conf2 = $conf) =~ s/PORT_(844\d)/'PORT_' . ($1 + 10)/ge;
$t2->write_file_expand('sluice.conf', $conf2);
$t2->run();
is((s_client(8455, '-tls1_3', 'sess_in', 'k13.pem'))[1], 'r', 'key file: TLSv1.3 ticket resumes on another instance');
is((s_client(8455, '-tls1_2', 'sess_in', 'k12.pem'))[1], 'r', 'key file: TLSv1.2 ticket resumes on another instance');
is((s_client(8454, '-tls1_3', 'sess_in', 'k13.pem'))[1], '.', 'other keys: full handshake');
$t2->stop();

# Hostile: a TLS 1.2 hello with a garbage ticket gets a full handshake
# (a Certificate message), and the workers live on.

my @workers = $t->worker_pids();
ok(garbage_ticket_full_handshake(8444), 'garbage ticket: full handshake');
is(join(',', $t->worker_pids()), join(',', @workers), 'workers alive');

# Across a binary upgrade: the new master gets the keys.

s_client(8444, '-tls1_3', 'sess_out', 'u13.pem');
s_client(8444, '-tls1_2', 'sess_out', 'u12.pem');
my $old = $t->master();
kill 'USR2', $old;
my $new;
ok(poll_until(sub {
	$new = -e "$d/sluice.pid" ? $t->read_file('sluice.pid') : '';
	chomp $new;
	$new ne '' && $new != $old && -e "$d/sluice.pid.oldbin";
}, 10), 'upgraded');
kill 'WINCH', $old;
ok(poll_until(sub { !$t->worker_pids() }, 10), 'old workers gone');
is((s_client(8444, '-tls1_3', 'sess_in', 'u13.pem'))[1], 'r', 'TLSv1.3 ticket resumes on the new binary');
is((s_client(8444, '-tls1_2', 'sess_in', 'u12.pem'))[1], 'r', 'TLSv1.2 ticket resumes on the new binary');
kill 'QUIT', $old;
$t->wait_exit(10);
kill 'QUIT', $new;
poll_until(sub { !kill 0, $new }, 10);

# A TLS 1.2 ClientHello offering a session id and a ticket of garbage;
# true when the server answers with a Certificate (a full handshake).
sub garbage_ticket_full_handshake {
	my ($port) = @_;
	my $ticket = join '', map { chr(int(rand(256))) } 1 .. 190;
	my $ext = '';
	my $e = sub { my ($type, $data) = @_; $ext .= pack('nn', $type, length $data) . $data };
	$e->(0x000a, pack('n', 4) . pack('nn', 0x001d, 0x0017));
	$e->(0x000b, "\x01\x00");
	$e->(0x000d, pack('n', 6) . pack('nnn', 0x0403, 0x0804, 0x0401));
	$e->(0x0017, '');
	$e->(0xff01, "\x00");
	$e->(0x0023, $ticket);
	my $body = "\x03\x03" . ('r' x 32) . "\x20" . ('s' x 32)
		. pack('n', 4) . pack('nn', 0xc02b, 0xc02f) . "\x01\x00"
		. pack('n', length $ext) . $ext;
	my $hs = "\x01" . substr(pack('N', length $body), 1) . $body;
	my $rec = "\x16\x03\x01" . pack('n', length $hs) . $hs;
	my $c = IO::Socket::INET->new(PeerAddr => '127.0.0.1:' . port($port), Timeout => 5)
		or return 0;
	$c->syswrite($rec);
	my ($buf, $sel) = ('', IO::Select->new($c));
	while ($sel->can_read(3)) {
		$c->sysread($buf, 16384, length $buf) or last;
		# Handshake records' messages: ServerHello (2), then Certificate
		# (11) for a full handshake, ChangeCipherSpec for a resumed one.
		my ($msgs, $rest) = ('', $buf);
		while (length $rest >= 5) {
			my ($type, $len) = unpack('C x2 n', $rest);
			last if length $rest < 5 + $len;
			return 0 if $type == 20;
			$msgs .= substr($rest, 5, $len) if $type == 22;
			$rest = substr($rest, 5 + $len);
		}
		while (length $msgs >= 4) {
			my ($mt, $l) = (ord($msgs), unpack('N', "\0" . substr($msgs, 1, 3)));
			return 1 if $mt == 11;
			$msgs = substr($msgs, 4 + $l);
		}
	}
	return 0;
}
