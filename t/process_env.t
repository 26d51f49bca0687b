#!/usr/bin/perl

# A SLUICE (or SLUICE_ZONES) environment variable that a binary upgrade did not
# write: garbage, numbers of closed descriptors, of descriptors that are not
# listening sockets (a file, a pipe, a connected socket, sluice's own log),
# a zone that is not sluice's memory. Each is a [warn] and is ignored: sluice
# starts as usual (it daemonizes), serves, and nothing is closed under it. A
# listening socket named twice is adopted once and served.

use warnings;
use strict;

use Test::More;
use Fcntl qw/F_SETFD F_GETFD FD_CLOEXEC/;
use IO::Socket::INET;
use Socket qw/AF_UNIX SOCK_STREAM PF_UNSPEC/;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(21);
my $d = $t->testdir();

# daemon on (the default): a start that adopted nothing daemonizes.
sub conf {
	my ($listen) = @_;
	$listen //= '127.0.0.1:%%PORT_8080%%';
	$t->write_file_expand('sluice.conf', <<"EOF");

pid %%TESTDIR%%/sluice.pid;
error_log %%TESTDIR%%/error.log debug;

events {
}

http {
    access_log off;
    server {
        listen $listen;
        location / { return 200 "pid \$pid"; }
    }
}

EOF
}

# Starts sluice with the variables set, then: did it daemonize and serve,
# and is the warning there? Stops it again.
sub start_with {
	my ($name, $env, $warn, %opts) = @_;
	local $ENV{SLUICE} = $env->{SLUICE};
	local $ENV{SLUICE_ZONES} = $env->{SLUICE_ZONES};
	delete $ENV{SLUICE_ZONES} unless defined $env->{SLUICE_ZONES};
	$t->run();
	my $m = $t->master();
	my $stat = $t->read_file("/proc/$m/stat");
	my ($sid) = $stat =~ /\)\s+\S+\s+\d+\s+\d+\s+(\d+)/;
	ok($m != $t->{_child} && ($sid // 0) == $m, "$name: daemonized");
	like(http_get('/', PeerAddr => $opts{peer}), qr/pid \d+$/, "$name: serves");
	my @missing = grep { !$t->waitforlog($_, 1) } @$warn;
	is(join(', ', @missing), '', "$name: warned");
	$t->stop();
}

conf();

start_with('garbage', { SLUICE => '/usr/lib/sluice' },
	[qr/\[warn\] .*invalid socket number "\/usr\/lib\/sluice" in SLUICE environment variable, ignoring$/m]);

start_with('garbage in the list', { SLUICE => '900;x;901;' },
	[qr/\[warn\] .*invalid socket number "x;901;" in SLUICE environment variable, ignoring the rest of the variable$/m,
	qr/\[warn\] .*inherited socket #900 in SLUICE environment variable is not open, ignoring$/m]);

start_with('closed', { SLUICE => '900;1000;', SLUICE_ZONES => 'z:901;' },
	[qr/\[warn\] .*inherited socket #1000 in SLUICE environment variable is not open, ignoring$/m,
	qr/\[warn\] .*inherited zone "z" #901 in SLUICE_ZONES environment variable is not open, ignoring$/m]);

# Descriptors of the test, left open across exec: a file, a pipe's end and a
# connected socket.
$^F = 1000;
open my $file, '<', "$d/sluice.conf" or die "open: $!";
pipe(my $pr, my $pw) or die "pipe: $!";
socketpair(my $s1, my $s2, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die "socketpair: $!";
$^F = 2;
my ($f, $p, $s) = (fileno($file), fileno($pr), fileno($s1));

start_with('not sockets', { SLUICE => "$f;$p;$s;", SLUICE_ZONES => "z:$f;y:$s;w:x" },
	[qr/\[warn\] .*inherited socket #$f in SLUICE environment variable is not a socket, ignoring$/m,
	qr/\[warn\] .*inherited socket #$p in SLUICE environment variable is not a socket, ignoring$/m,
	qr/\[warn\] .*inherited socket #$s in SLUICE environment variable is not a listening socket, ignoring$/m,
	qr/\[warn\] .*inherited zone "z" #$f in SLUICE_ZONES environment variable is not a zone's shared memory, ignoring$/m,
	qr/\[warn\] .*invalid zone "w:x" in SLUICE_ZONES environment variable, ignoring$/m]);
close $file;
close $pr;
close $pw;

# The connected socket was left open for its owner: it still carries bytes.
syswrite($s2, "ping") or die;
my $got = '';
sysread($s1, $got, 4);
is($got, 'ping', 'a socket that does not listen is left open');

# Every low number: sluice's own log among them. Nothing of its own is closed:
# the log goes on, reloads work.
start_with('own descriptors', { SLUICE => join('', map { "$_;" } 0 .. 40) },
	[qr/\[warn\] .*inherited socket #0 in SLUICE environment variable is a standard stream, ignoring$/m,
	qr/\[warn\] .*inherited socket #3 in SLUICE environment variable is not a socket, ignoring$/m]);
my ($tail) = $t->read_file('error.log') =~ /using inherited sockets from "0;1;2;.*?\n(.*)\z/s;
like($tail // '', qr/start worker processes\n.*\[notice\] \d+#0: exit\n\z/s,
	'own descriptors: the log goes on to the end');

# A listening socket named twice: adopted once, served, no double close. It
# is an inherited start, so sluice does not daemonize (as nginx).
my $l = IO::Socket::INET->new(Listen => 128, LocalAddr => '127.0.0.1', Proto => 'tcp',
	ReuseAddr => 1) or die "listen: $!";
fcntl($l, F_SETFD, fcntl($l, F_GETFD, 0) & ~FD_CLOEXEC) or die "fcntl: $!";
my ($lfd, $lport) = (fileno($l), $l->sockport());
conf("127.0.0.1:$lport");
{
	local $ENV{SLUICE} = "$lfd;$lfd;";
	$t->run();
}
close $l;
ok($t->master() == $t->{_child}, 'twice: an inherited start stays in the foreground');
like(http_get('/', PeerAddr => "127.0.0.1:$lport"), qr/pid \d+$/, 'twice: serves');
ok($t->waitforlog(qr/\[warn\] .*inherited socket #$lfd in SLUICE environment variable is named twice, ignoring$/m),
	'twice: warned');
$t->stop();
is($t->{_exit_status}, 0, 'twice: exit code 0');
