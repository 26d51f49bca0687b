#!/usr/bin/perl

# An address in use at start is tried again, as nginx does: five rounds 500 ms
# apart, each failure logged, then "still could not bind()". A port freed
# meanwhile (a process letting it go) is taken and served.

use warnings;
use strict;

use Test::More;
use IO::Socket::INET;

BEGIN { use FindBin; chdir($FindBin::Bin); }

use lib 'lib';
use Test::Sluice qw/:all/;

my $t = Test::Sluice->new()->has(qw/http/)->plan(6);
$t->expect_errors(qr/\[emerg\] .*bind\(\) to 127\.0\.0\.1:\d+ failed \(98: /,
	qr/\[emerg\] .*still could not bind\(\)/);

$t->write_file_expand('sluice.conf', <<'EOF');

%%TEST_GLOBALS%%

events {
}

http {
    access_log off;
    server {
        listen 127.0.0.1:%%PORT_8080%%;
        location / { return 200 "served\n"; }
    }
}

EOF

my $p = port(8080);
my $d = $t->testdir();

# A helper holds the port for 1.2 s, then lets it go.
my $ready = "$d/holder.ready";
Test::Sluice::_release_ports();
$t->run_daemon(sub {
	my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$p", Listen => 5, ReuseAddr => 1)
		or die "hold: $!\n";
	open my $fh, '>', $ready or die;
	close $fh;
	select(undef, undef, undef, 1.2);
});
$t->waitforfile($ready) or die "holder did not start\n";
$t->run();

like(http_get('/'), qr/served/, 'started once the port was free');
my $log = $t->read_file('error.log');
like($log, qr/\[emerg\] .*bind\(\) to 127\.0\.0\.1:$p failed \(98: Address already in use\)/,
	'each failed round logged');
like($log, qr/\[notice\] .*try again to bind\(\) after 500ms/, 'and the retry announced');
$t->stop();

# Held for good: five rounds, then nginx's last word and exit 1.
my $l = IO::Socket::INET->new(LocalAddr => "127.0.0.1:$p", Listen => 5, ReuseAddr => 1)
	or die "hold: $!\n";
my $rc = system($t->binary(), '-p', "$d/", '-c', 'sluice.conf', '-e', 'error2.log');
isnt($rc, 0, 'exits with an error when the port stays in use');
my $log2 = $t->read_file('error2.log');
my $rounds = () = $log2 =~ /bind\(\) to 127\.0\.0\.1:$p failed/g;
is($rounds, 5, 'five rounds');
like($log2, qr/\[emerg\] .*still could not bind\(\)/, 'then "still could not bind()"');
close $l;
